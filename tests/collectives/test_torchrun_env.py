"""The launcher's environment (collectives.torchrun_env): one reader of torchrun's variables, one behaviour on a
malformed value (ValueError naming the variable), whoever reads it."""

from __future__ import annotations

import pytest

from collectives.torchrun_env import VARIABLES, TorchrunEnv, torchrun_env

TORCHRUN = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"}
"""What torchrun sets for the second process of the second node of a 2 x 4 job."""


def test_torchruns_variables_are_read_as_integers():
    env = torchrun_env(TORCHRUN)
    assert env == TorchrunEnv(rank=5, world_size=8, local_rank=1, local_world_size=4, group_rank=1)
    assert env.launched and env.node_offset == 4  # node 1 starts at global index 1 * 4


def test_unset_variables_are_none_and_a_lone_process_is_not_launched():
    env = torchrun_env({})
    assert env == TorchrunEnv() and not env.launched and env.node_offset == 0
    assert not torchrun_env({"RANK": "0", "WORLD_SIZE": "1"}).launched
    assert torchrun_env({"GROUP_RANK": "3"}).node_offset == 0  # no LOCAL_WORLD_SIZE: no offset


@pytest.mark.parametrize("name", VARIABLES)
@pytest.mark.parametrize("value", ["x", "", "1.5", "-1", "0x2"])
def test_a_malformed_value_names_its_variable(name, value):
    with pytest.raises(ValueError, match=rf"^{name}: expected a non-negative integer .* got {value!r}"):
        torchrun_env({**TORCHRUN, name: value})


def test_the_readers_share_the_behaviour(monkeypatch):
    import collectives.distributed as cd

    monkeypatch.setenv("LOCAL_RANK", " 3 ")
    assert cd._resolve_slot(cd.Options(slot="local_rank"), 0, None) == 3
    monkeypatch.setenv("LOCAL_RANK", "three")
    with pytest.raises(ValueError, match="^LOCAL_RANK: expected a non-negative integer"):
        cd._resolve_slot(cd.Options(slot="local_rank"), 0, None)
