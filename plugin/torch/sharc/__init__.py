"""sharc: collectives for sharded training (AllGather / ReduceScatter first).

`import sharc.torch` registers the torch.distributed backend "sharc".
"""

__version__ = "0.1.0"
