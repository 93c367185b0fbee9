"""Reports: pure functions from results to text, one module per format."""
