"""Small engines on the tiny backend for the tests."""

from lora_trainer.engine import Engine, Limits
from lora_trainer.tiny import LoRAConfig, TinyBackend, TinyModelConfig


def tiny_engine(
    seed: int = 0, micro_batch_size: int = 0, dropout: float = 0.0, limits: Limits = None, weight_decay: float = 0.0
) -> Engine:
    backend = TinyBackend(
        LoRAConfig(rank=4, alpha=8.0, dropout=dropout),
        TinyModelConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_positions=256, seed=seed),
    )
    return Engine(backend, micro_batch_size=micro_batch_size, default_max_tokens=8, limits=limits, weight_decay=weight_decay)


def prompt_ids(engine: Engine, text: str):
    return engine.encode_prompt({"text": text, "messages": []}, "test")
