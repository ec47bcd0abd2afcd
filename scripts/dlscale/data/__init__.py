"""The data a study trains on: the built-in datasets, where an archive or image folder
comes from, TFRecord shards written and read (with and without TensorFlow), preparation."""
