"""Images as Sources: class folders and JPEG/PNG TFRecords, decoded on the host, and
training augmentation that a resumed run repeats exactly.

Every image becomes a model's input through one `ImageContract` (size, channels, crop, resize,
range): training's Sources decode through it, image Tasks state it, exports carry it and
prediction decodes encoded images with the model's own, so what a user reads back is what the
run measured.

Every random choice of an augmentation is drawn from each training example's stateless seed,
so a resumed run repeats it, and evaluation batches are never augmented.

Modules, in reading order:
  image_contract.py ImageContract: how encoded bytes become the model's input (both routes)
  image_folders.py  images in class folders (root/<class>/*.png) as Sources; image_inputs
  image_records.py  image TFRecords (Kaggle's, ImageNet's layouts) as Sources; writing them;
                    image_record_inputs (encoded, keyed by their id) to predict on
  augment.py        ImageAugment: crop, flip, colour, one seed per example
  randaugment.py    RandAugment's N ops at magnitude M, drawn from the example's seed
  mixup.py          mixup and CutMix of a batch, drawn from its examples' seeds

Entry points: `ImageContract`, `image_folder_sources`, `image_inputs`, `image_tfrecord_source`,
`image_record_inputs`, `write_image_records`, `RecordLayout`, `ImageAugment` (public:
keras_tpu.data); `image_contract.read` (inference/finished_run.py); `image_folders`,
`image_records` (scripts/prediction_inputs.py).
"""
