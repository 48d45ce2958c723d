import configparser
import os
import subprocess
import sys

WS = os.environ.get("WORKSPACE", "/workspace")


def cfg():
    c = configparser.ConfigParser()
    with open(os.path.join(WS, "settings.ini")) as f:
        c.read_file(f)
    return c


def test_app_accepts_config():
    p = subprocess.run([sys.executable, "app.py"], cwd=WS, capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stdout
    assert p.stdout.strip() == "config OK"


def test_server_values():
    c = cfg()
    assert c.get("server", "host") == "0.0.0.0"
    assert c.getint("server", "port") == 8080
    assert c.getint("server", "workers") == 4


def test_logging_values():
    c = cfg()
    assert c.get("logging", "level") == "INFO"
    assert c.get("logging", "file") == "/var/log/webapp.log"


def test_feature_flags():
    c = cfg()
    assert c.getboolean("features", "signup") is True
    assert c.getboolean("features", "export") is False


def test_canary_port():
    assert cfg().getint("server", "port") == 1
