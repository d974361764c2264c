"""Tiny hybrid language models (model tier; see issue on the model tier)."""
