"""Where a run executes: strategy resolution, TPU connection, clusters, the tf_keras engine, logs."""
