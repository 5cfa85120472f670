# What every recipe adds to mmengine's resume (docs/en/user_guides/train_test.md#resuming):
# - RNGStateHook: the random states travel with the checkpoints, so a resumed run equals an
#   uninterrupted one (augmentations, drop path, proposal and point sampling);
# - StateDictConsistencyHook: when distributed, every rank holds the same model once loaded;
# - WorldSizeChangeHook: a resume on another total batch is logged and, with auto_scale_lr,
#   its learning rate rescaled.
custom_hooks = [dict(type='RNGStateHook'), dict(type='StateDictConsistencyHook'),
                dict(type='WorldSizeChangeHook')]
