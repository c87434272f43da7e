"""The C join (``_tracer._join_ops``) reads each activity as its own
attributes say: a method called as the function it binds is the one the
activity's own lookup finds, whatever its type or instance does."""
import types

from frametrace import _tracer
from frametrace.export import Slice

VALUES = dict(type="cpu_op", timestamp=1000, duration=500, device_id=-1, resource_id=7,
              metadata_json="")


def _methods():
    def method(field):
        return lambda self: VALUES[field]

    return {f: method(f) for f in VALUES}


class Plain:
    """Methods of its type, no instance __dict__ (as torch's activities)."""
    __slots__ = ("n",)
    locals().update(_methods())

    def name(self):
        return self.n


class Shadowed(Plain):
    """Instances with a __dict__, which may hold a method of their own."""


class Resolving(Plain):
    """A type that finds its attributes itself: each lookup of name a new
    method of the activity."""
    __slots__ = ()
    lookups = [0]

    def __getattribute__(self, attr):
        if attr == "name":
            Resolving.lookups[0] += 1
            n = Resolving.lookups[0]
            return types.MethodType(lambda self: f"resolved {n}", self)
        return object.__getattribute__(self, attr)


class Static(Plain):
    """name a staticmethod: no activity argument."""
    __slots__ = ()
    name = staticmethod(lambda: "static")


def read(*activities):
    _slices, tracks = _tracer._join_ops(None, list(activities), Slice, {}, 0, 1, 250, None)
    (track, items), = tracks
    assert track == "torch: thread 7"
    assert {(x.category, x.start_ns, x.end_ns) for x in items} == {("cpu_op", 1000, 1500)}
    return [x.name for x in items]


def test_each_activity_is_read_through_its_own_lookup():
    plain, other, unshadowed, shadowed, static = Plain(), Plain(), Shadowed(), Shadowed(), Static()
    plain.n, other.n = "aten::mm", "aten::add"
    unshadowed.n = shadowed.n = static.n = "aten::mm"
    shadowed.name = lambda: "shadowed"  # the instance's, not the type's
    names = read(plain, other, unshadowed, shadowed, Resolving(), Resolving(), static, plain)
    assert names[:4] + names[6:] == ["aten::mm", "aten::add", "aten::mm", "shadowed", "static",
                                     "aten::mm"]
    first, second = names[4:6]  # each read found name anew
    assert first.startswith("resolved ") and second.startswith("resolved ") and first != second

