"""A model of your own written for Keras 3 (`import keras`): it runs on the TensorFlow
and the JAX backend alike, because it uses only Keras layers and `keras.ops`.

    training: {keras: 3}
    sweep:
      models: [{from: examples/my_keras3_model.py:mixer, label: Mixer}]
      backend: [tensorflow, jax]        # one series per backend
"""

import keras
from keras import layers, ops


class ChannelMix(layers.Layer):
    """A residual per-pixel MLP over the channels, written with keras.ops only."""

    def __init__(self, hidden, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden

    def build(self, input_shape):
        channels = input_shape[-1]
        self.up = self.add_weight(shape=(channels, self.hidden), initializer="he_normal")
        self.down = self.add_weight(shape=(self.hidden, channels), initializer="he_normal")

    def call(self, x):
        return x + ops.matmul(ops.gelu(ops.matmul(x, self.up)), self.down)

    def get_config(self):
        return {**super().get_config(), "hidden": self.hidden}


def mixer(input_shape, num_classes, width=16, blocks=2):
    """Patches of 4x4 pixels embedded to `width` channels, `blocks` channel mixers, global
    average pooling and a dense classifier (logits: dlscale adds the softmax)."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Conv2D(width, 4, strides=4)(inputs)
    for _ in range(blocks):
        x = ChannelMix(2 * width)(layers.LayerNormalization()(x))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="mixer")
