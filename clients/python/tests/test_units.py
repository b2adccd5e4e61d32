"""Pieces of the client that need no database: the forget queue, Health's
place line, the options, the DSN forms."""

import pytest

import tandem
from tandem import client as tc
from tandem._coord import place_in


def test_forget_queue_takes_full_batches_of_old_enough_rows():
    s = tc._CPState()
    for i in range(tc.FORGET_BATCH - 1):
        s.add_forget("%032x" % (i + 1))
        s.forget_at[-1] = 0.0  # long ago
    assert s.take_forget(1e9) == []  # not a full batch yet
    s.add_forget("%032x" % 999)
    assert s.take_forget(s.forget_at[-1] + 1) == []  # the newest is too young: still not a batch
    got = s.take_forget(s.forget_at[-1] + tc.FORGET_AFTER)
    assert len(got) == tc.FORGET_BATCH and s.forget == []
    s.give_back(got[:3])
    s.add_forget("%032x" % 1000)
    assert s.forget[:3] == got[:3] and s.forget_at[:3] == [0.0] * 3  # given back first, old enough


def test_forget_queue_is_bounded():
    s = tc._CPState()
    s.forget = ["x"] * tc.FORGET_KEEP
    s.forget_at = [0.0] * tc.FORGET_KEEP
    s.add_forget("y")
    assert len(s.forget) == tc.FORGET_KEEP


def test_health_place_is_read_from_its_role_line():
    msg = "rm pg: says cluster=bad epoch=99\nrole=primary cluster=0123456789abcdef0123456789abcdef epoch=3 standby=none"
    assert place_in(msg) == ("0123456789abcdef0123456789abcdef", 3)
    assert place_in("cluster=abc epoch=2") == ("abc", 2)
    assert place_in("") == ("", 0)


def test_options_are_checked():
    rms = [tandem.RM("pg", "postgres")]
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=rms, defaults=tandem.CommitOptions(durability="fast"))
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=rms, defaults=tandem.CommitOptions(decide_at="somewhere"))
    c = tandem.Client(rms=rms)
    with pytest.raises(tandem.ConfigError):
        c.begin(tandem.CommitOptions(visibility="later"))
    assert c.begin(tandem.CommitOptions(decide_at="")).opts.decide_at == "auto"
    c.close()


def test_configuration_errors():
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("Bad", "postgres")])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres"), tandem.RM("pg", "mysql")])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "oracle")])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres")], coordinator="localhost")  # no port
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres")], max_txn_age=7200)
