"""A model of your own for dlscale: a function that gets the input shape and the number
of classes and returns an uncompiled Keras model (image floats in [0, 1] in, one value
per class out). dlscale compiles it with the study's optimizer, learning-rate scaling
and precision, and feeds it the prepared images.

    sweep:
      models: [examples/my_model.py:small_resnet]        # labelled small_resnet
      # or: [{from: examples/my_model.py:small_resnet, label: SmallResNet}]
"""

from tensorflow import keras  # the Keras that TensorFlow trains with (tf_keras here)


def small_resnet(input_shape, num_classes, width=16, blocks=2):
    """A small residual network: a 3x3 stem, `blocks` residual blocks per stage at three
    widths (each stage halves the resolution), global average pooling, a dense
    classifier with a softmax."""
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
    for stage in range(3):
        filters = width * 2 ** stage
        for block in range(blocks):
            stride = 2 if stage and not block else 1
            shortcut = x
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.Activation("relu")(x)
            if stride != 1 or shortcut.shape[-1] != filters:
                shortcut = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
            x = keras.layers.Conv2D(filters, 3, strides=stride, padding="same",
                                    use_bias=False)(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.Activation("relu")(x)
            x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
            x = keras.layers.Add()([x, shortcut])
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Activation("relu")(x))
    outputs = keras.layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="small_resnet")
