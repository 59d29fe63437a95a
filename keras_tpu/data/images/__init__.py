"""Images as Sources: class folders and JPEG/PNG TFRecords, decoded on the host, and
training augmentation that a resumed run repeats exactly."""
