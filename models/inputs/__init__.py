"""What users send: payload readers, input spaces, batch encoding and synthetic streams."""
