"""traceview: performance-trace analysis for Mixture-of-Experts training on GPUs."""
__version__ = "0.1.0"
