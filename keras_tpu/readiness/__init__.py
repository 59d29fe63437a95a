"""Will the TPU work: the doctor, build and libtpu checks, and the TPU compile rehearsal."""
