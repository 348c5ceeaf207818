import pytest

from offloadprobe.core.errors import UsageError
from offloadprobe.core.units import MissingUnit, format_bytes, format_ratio, gbps, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512MiB", 512 * 2**20),
        ("5GiB", 5 * 2**30),
        ("5 GiB", 5 * 2**30),
        ("1.5GB", 1_500_000_000),
        ("2048B", 2048),
        ("1700GiB", 1700 * 2**30),
        ("64k", 65536),
    ],
)
def test_parse_size_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "5XB", "-1GiB", "0", "GiB"])
def test_parse_size_rejects_with_a_fix(text):
    with pytest.raises(UsageError, match=r"512MiB|positive"):
        parse_size(text, what="--payload")


@pytest.mark.parametrize("text", ["16", " 16 ", "2048", "1.5", ".5"])
def test_a_bare_number_is_not_bytes_but_refused(text):
    """Bytes to one flag, MiB to the user: a bare number is refused, zero or not zero."""
    with pytest.raises(MissingUnit) as err:
        parse_size(text, what="--payload", allow_zero=True)
    number = text.strip()
    assert str(err.value) == f"--payload {number} has no unit: give a unit, e.g. {number}MiB"


def test_zero_needs_no_unit_only_where_zero_is_meaningful():
    assert parse_size("0", allow_zero=True) == 0
    assert parse_size("0GiB", allow_zero=True) == 0
    with pytest.raises(UsageError, match="must be positive"):
        parse_size("0", what="--payload")


def test_format_edges():
    assert format_bytes(5 * 2**30) == "5.00 GiB"
    assert format_bytes(3 * 2**20) == "3.00 MiB"
    assert format_bytes(-2 * 2**20) == "-2.00 MiB"
    assert format_bytes(None) == "n/a"
    assert format_ratio(2.6) == "2.60x"
    assert gbps(10**9, 0.5) == 2.0
    assert gbps(0, 1.0) is None
