"""Data files (icons, the demo model, the catalog); read them through engine.resources."""
