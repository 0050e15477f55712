"""Integrations with training frameworks (imported on use)."""
