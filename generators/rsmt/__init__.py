"""RSMT: stylised real-time motion transitions (periodic autoencoder, motion manifold, sampler)."""
