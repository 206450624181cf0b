"""The one atomic write (nlnet.data.atomic): whole files or none, a normal file mode."""

import os

import pytest

from nlnet.data.atomic import atomic_path


@pytest.mark.parametrize("durable", [False, True])
def test_atomic_path_replaces_whole_or_keeps_the_old_file(tmp_path, durable):
    path = tmp_path / "sub" / "config.yaml"
    with atomic_path(path, durable=durable) as tmp:
        assert tmp.parent == path.parent and not path.exists()
        tmp.write_text("new")
    assert path.read_text() == "new"
    umask = os.umask(0o022)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # open()'s mode, not mkstemp's 0o600
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(path, durable=durable) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "new"  # the old file, whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.yaml"]  # no temp left
