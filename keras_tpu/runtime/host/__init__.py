"""The host a run is on: what its CPU computes, which TensorFlow build it has, how it allocates."""
