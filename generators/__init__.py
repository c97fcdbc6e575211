"""2D motion generators (paper 3.4, B.4-B.5): canonical windows, VQ-VAE tokenizer, GPT
(single- and multi-view), diffusion baseline and 2D-motion FID. See docs/generators.md."""
