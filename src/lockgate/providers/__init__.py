"""Provider encoders and decoders. Provider-specific code lives only here."""
