"""The scripts attach and attach --dump have a target run are valid
Python, and the names they call in the target's frametrace are where
they look for them (on every Python: running them needs 3.14+)."""
import frametrace.remote
from frametrace.remote import _scripts

CONFIG = {"socket": "/nonexistent/s", "script": "/nonexistent/attach.py",
          "workdir": "/nonexistent", "deadline": 0.0, "handshake_timeout": 1.0}


def test_the_attach_script_calls_begin():
    text = _scripts.attach_script(1234, CONFIG)
    compile(text, "attach.py", "exec")
    assert 'importlib.import_module("frametrace.remote")' in text
    assert "agent._begin(sock, config, hello, " in text
    assert callable(frametrace.remote._begin)


def test_the_dump_script_calls_serve_dump():
    text = _scripts.dump_script(1234, dict(CONFIG, reason="asked"))
    compile(text, "dump.py", "exec")
    assert 'sys.modules.get("frametrace.remote")' in text
    assert 'getattr(remote, "_serve_dump", None)' in text
    assert callable(frametrace.remote._serve_dump)


def test_a_late_script_does_nothing(tmp_path):
    """Past its deadline a script only removes its files (the attacher gave
    up): run here, it neither connects nor raises."""
    (tmp_path / "attach.py").write_text("")
    for text in (_scripts.attach_script(1234, dict(CONFIG, script=str(tmp_path / "attach.py"),
                                                   workdir=str(tmp_path))),
                 _scripts.dump_script(1234, dict(CONFIG, reason="asked"))):
        exec(compile(text, "script.py", "exec"), {})
    assert not tmp_path.exists()
