"""Images as Sources: class folders and JPEG/PNG TFRecords, decoded on the host, and
training augmentation that a resumed run repeats exactly.

Every random choice of an augmentation is drawn from each training example's stateless seed,
so a resumed run repeats it, and evaluation batches are never augmented.

Modules, in reading order:
  image_folders.py  images in class folders (root/<class>/*.png) as Sources; image_inputs
  image_records.py  image TFRecords (Kaggle's, ImageNet's layouts) as Sources; writing them
  augment.py        ImageAugment: crop, flip, colour, one seed per example
  randaugment.py    RandAugment's N ops at magnitude M, drawn from the example's seed
  mixup.py          mixup and CutMix of a batch, drawn from its examples' seeds

Entry points: `image_folder_sources`, `image_inputs`, `image_tfrecord_source`,
`write_image_records`, `RecordLayout`, `ImageAugment` (public: keras_tpu.data);
`image_folders` (scripts/prediction_inputs.py).
"""
