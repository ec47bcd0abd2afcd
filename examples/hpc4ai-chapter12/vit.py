"""The seed study's chapter 12 model as dlscale's own point: torchvision's VisionTransformer
trained under DistributedDataParallel (backend torch, strategy ddp), one process per GPU,
as the chapter's train_ddp.py trains ViT-H/14 (its code needs CUDA and NCCL; dlscale's
points run on CPUs too, over gloo).

    sweep:
      models: [examples/hpc4ai-chapter12/vit.py:vit_h_14]   # the chapter's, 224 px
      gpus: [1, 2, 4, 8, 16, 32]
    training: {keras: 3, backend: torch, batch_per_gpu: 128, precision: mixed_bfloat16}

`vit_tiny` is the same architecture at a size a CPU trains in seconds (the tests' and the
laptop's: 32 px images in 8 x 8 patches, two layers). dlscale feeds N x C x H x W floats in
[0, 1] and takes the logits; the image size is the study's (data.image_size), which the
patch size must divide.
"""

from torchvision.models import VisionTransformer
from torchvision.models import vit_h_14 as torchvision_vit_h_14


def vit_h_14(input_shape, num_classes):
    """torchvision's ViT-H/14 (632 M parameters, weights=None) at the study's image size."""
    return torchvision_vit_h_14(weights=None, image_size=input_shape[0],
                                num_classes=num_classes)


def vit_tiny(input_shape, num_classes):
    """A VisionTransformer of two layers, two heads and 64 features on 8 x 8 patches."""
    return VisionTransformer(image_size=input_shape[0], patch_size=8, num_layers=2,
                             num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=num_classes)
