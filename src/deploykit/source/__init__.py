"""Torch model sources: the factory the user named, and the export extension point."""
