"""Table 1 / Eq. 1 / App. B collective costs against hand-computed cases; vectorization."""
import numpy as np
import pytest

from studykit.perfmodel import collectives as col

BW = 1e9  # bytes/s = 8 Gbit/s


def test_units():
    assert col.gbps_to_bytes_s(8.0) == pytest.approx(1e9)
    assert col.bytes_s_to_gbps(1.25e9) == pytest.approx(10.0)


def test_ring_allreduce_eq1_hand_case():
    # Eq. 1: 2 alpha (p-1) + 2 b (p-1) / (p BW) = 2e-3*3 + 2*1e8*3/(4*1e9) = 0.006 + 0.15
    assert col.ring_allreduce_s(1e8, 4, 1e-3, BW) == pytest.approx(0.156)
    assert col.ring_allreduce_s(1e8, 1, 1e-3, BW) == 0.0  # one worker sends nothing


def test_tree_allreduce_table1_hand_case():
    # 2 alpha log2 p + 2 beta log2(p) n = 2e-4*3 + 2*3*1e6/1e9
    assert col.tree_allreduce_s(1e6, 8, 1e-4, BW) == pytest.approx(0.0066)


def test_parameter_server_table1_hand_case():
    # 2 alpha + 2 beta (p-1) n = 2e-3 + 2*4*1e6/1e9
    assert col.parameter_server_s(1e6, 5, 1e-3, BW) == pytest.approx(0.010)
    assert col.parameter_server_s(1e6, 1, 1e-3, BW) == 0.0


def test_ring_allgather_appB_hand_case():
    # (p-1) alpha + (p-1) b / BW = 4e-3 + 4e6/1e9
    assert col.ring_allgather_s(1e6, 5, 1e-3, BW) == pytest.approx(0.008)


def test_incast_is_off_by_default_and_inflates_bandwidth_term():
    assert col.allgather_incast_s(1e6, 5, 1e-3, BW) == pytest.approx(col.ring_allgather_s(1e6, 5, 1e-3, BW))
    assert col.allgather_incast_s(1e6, 5, 1e-3, BW, incast_coeff=0.5) == pytest.approx(0.004 + 1.5 * 0.004)
    with pytest.raises(ValueError, match="incast_coeff"):
        col.allgather_incast_s(1e6, 5, 1e-3, BW, incast_coeff=-1)


def test_ring_bandwidth_term_nearly_constant_in_p():
    # Sec. 2.2: "the bandwidth requirement for ring reduce stays almost constant" (-> 2 n / BW)
    t = col.ring_allreduce_s(1e9, np.array([64, 1024]), 0.0, BW)
    assert t[1] / t[0] == pytest.approx((1023 / 1024) / (63 / 64))


@pytest.mark.parametrize("name", sorted(col.COLLECTIVES))
def test_vectorized_equals_scalar_loop(name):
    fn = col.COLLECTIVES[name]
    n = np.geomspace(1e3, 1e9, 7)[:, None, None]
    p = np.array([1, 2, 3, 8, 64, 96])[None, :, None]
    bw = col.gbps_to_bytes_s(np.array([1.0, 10.0, 25.0]))[None, None, :]
    grid = fn(n, p, 5e-6, bw)
    assert grid.shape == (7, 6, 3)
    for i in range(7):
        for j in range(6):
            for k in range(3):
                assert grid[i, j, k] == pytest.approx(float(fn(float(n[i, 0, 0]), int(p[0, j, 0]), 5e-6,
                                                               float(bw[0, 0, k]))))


@pytest.mark.parametrize("name", sorted(col.COLLECTIVES))
def test_affine_in_bytes(name):
    """The model sums many collectives as count * latency + total bytes * per-byte cost."""
    fn = col.COLLECTIVES[name]
    a, b = fn(3e6, 16, 1e-5, BW), fn(5e6, 16, 1e-5, BW)
    lat = fn(0.0, 16, 1e-5, BW)
    assert a + b == pytest.approx(2 * lat + fn(8e6, 16, 0.0, BW))


def test_bad_inputs():
    with pytest.raises(ValueError, match="world_size"):
        col.ring_allreduce_s(1e6, 0, 1e-3, BW)
    with pytest.raises(ValueError, match="nbytes"):
        col.ring_allreduce_s(-1, 4, 1e-3, BW)
