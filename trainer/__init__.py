"""The Ray Train job: Gemma 3 vision LoRA/QLoRA fine-tuning with TRL (mounted at /code/ in Ray pods).

Kept import-free: the controller imports trainer.codehash to fingerprint this package.
"""
