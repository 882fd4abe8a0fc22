"""The failure laboratory: authored provider streams replayed through the real pipeline."""
