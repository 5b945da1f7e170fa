"""The reference LoRA trainer endpoint of himes (trainer/PROTOCOL.md).

Modules, in reading order: losses (the GRPO and SFT objectives), engine
(sampling, scoring, updates, save/load on any backend), tiny and hf (the two
backends), protocol (request validation), server (HTTP), cli (flags).
"""
