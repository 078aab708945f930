"""Tessera inside other frameworks: `tessera.integrations.transformers` (Hugging Face Transformers)."""
