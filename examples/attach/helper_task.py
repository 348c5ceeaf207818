"""Work a helper process of the job does (a checkpoint writer's packing, say): one call
of ``pack_shard`` allocates and fills ``nbytes`` of host memory, as a shard would."""


def pack_shard(nbytes: int) -> int:
    shard = bytearray(nbytes)
    shard[::4096] = b"\x01" * len(shard[::4096])  # every page written
    return sum(shard[::4096])
