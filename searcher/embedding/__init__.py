"""Text embedders and loading them without holding anything up."""
