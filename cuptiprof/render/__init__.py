"""Presentation: relations in, text/CSV/JSON/Markdown/HTML out. No analysis here."""
