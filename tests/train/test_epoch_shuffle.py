"""A ``random_shuffle()`` training dataset is shuffled afresh each epoch across the ranks, as Ray Train does;
a seeded one keeps its order (train.epochs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflowless import data
from airflowless.train import DataParallelTrainer, ScalingConfig

ROWS, EPOCHS = 401, 3  # not a multiple of the ranks


def _loop(config: dict[str, Any]) -> None:
    import json
    from pathlib import Path

    from airflowless import train

    shard = train.get_dataset_shard("train")
    rank = train.get_context().get_world_rank()
    for epoch in range(config["epochs"]):  # written the way Ray's docs write a loop: iterate the shard each epoch
        ids = [int(i) for batch in shard.iter_batches(batch_size=64) for i in batch["id"]]
        Path(config["out"], f"{epoch}-{rank}.json").write_text(json.dumps(ids))
        train.report({"epoch": epoch, "rows": len(ids)})


def _fit(ds: Any, out: Path) -> list[list[int]]:
    """Each epoch's rows, rank 0's then rank 1's."""
    DataParallelTrainer(_loop, train_loop_config={"epochs": EPOCHS, "out": str(out)},
                        scaling_config=ScalingConfig(num_workers=2), datasets={"train": ds}).fit()
    return [[i for rank in (0, 1) for i in json.loads((out / f"{epoch}-{rank}.json").read_text())]
            for epoch in range(EPOCHS)]


def test_a_random_shuffle_without_a_seed_is_a_new_global_order_each_epoch(cluster_client: Any, home: Path,
                                                                           tmp_path: Path) -> None:
    ds = data.range(ROWS, parallelism=4).random_shuffle()
    epochs = _fit(ds, tmp_path)
    for epoch, ids in enumerate(epochs):
        assert sorted(ids) == list(range(ROWS)), f"epoch {epoch}: every row exactly once over the ranks"
        assert len(json.loads((tmp_path / f"{epoch}-0.json").read_text())) == ROWS // 2  # the same share each epoch
    assert epochs[0] == [row["id"] for row in ds.take_all()]  # the first epoch is the dataset's own order
    assert epochs[1] != epochs[0] and epochs[2] not in (epochs[0], epochs[1])
    first_rank = [set(json.loads((tmp_path / f"{epoch}-0.json").read_text())) for epoch in range(EPOCHS)]
    assert first_rank[0] != first_rank[1]  # rows move between the ranks, not only within a rank's share


def test_a_seeded_random_shuffle_keeps_its_order_for_every_epoch(cluster_client: Any, home: Path,
                                                                 tmp_path: Path) -> None:
    epochs = _fit(data.range(ROWS, parallelism=4).random_shuffle(seed=7), tmp_path)
    assert sorted(epochs[0]) == list(range(ROWS))
    assert epochs[1] == epochs[0] and epochs[2] == epochs[0]


def test_ranks_that_need_equal_shares_get_exactly_as_many_rows_each_epoch(cluster_client: Any) -> None:
    from airflowless.data.consume import materialized
    from airflowless.train.epochs import EpochShuffled
    from airflowless.train.sharding import assign_shards

    source = materialized(data.range(ROWS, parallelism=4).plan)
    plan = EpochShuffled(source.blocks, source.rows, seed=5, num_blocks=None)
    workers = ["a", "b"]  # where the ranks run does not matter to a shuffle made per epoch
    equal = [shards["train"][0] for shards in assign_shards(cluster_client, {"train": plan}, workers, equal=True)]
    assert [shard.rows for shard in equal] == [ROWS // 2, ROWS // 2]  # Torch's lock-step collectives
    for epoch in (0, 1):
        rows = [[int(i) for t in shard.tables(epoch, cluster_client) for i in t.column("id").to_pylist()]
                for shard in equal]
        assert [len(r) for r in rows] == [ROWS // 2, ROWS // 2] and not set(rows[0]) & set(rows[1])
    loose = [shards["train"][0] for shards in assign_shards(cluster_client, {"train": plan}, workers, equal=False)]
    assert sorted(shard.rows for shard in loose) == [ROWS // 2, ROWS // 2 + 1]
