"""Starts (pretends to start) the web app after checking settings.ini. Prints "config OK" when it is valid.

settings.ini must have:
  [server]    host (text), port (integer 1-65535), workers (integer >= 1)
  [logging]   level: one of DEBUG, INFO, WARNING, ERROR
              file: path of the log file
  [features]  signup, export: booleans (true/false, yes/no, on/off, 1/0)
"""
import configparser
import sys

LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR"}


def check(path="settings.ini"):
    cfg = configparser.ConfigParser()
    cfg.read_file(open(path))
    errors = []
    try:
        port = cfg.getint("server", "port")
        if not 1 <= port <= 65535:
            errors.append(f"server.port out of range: {port}")
        if cfg.getint("server", "workers") < 1:
            errors.append("server.workers must be >= 1")
        cfg.get("server", "host")
        if cfg.get("logging", "level") not in LEVELS:
            errors.append(f"logging.level must be one of {sorted(LEVELS)}")
        cfg.get("logging", "file")
        cfg.getboolean("features", "signup")
        cfg.getboolean("features", "export")
    except (configparser.Error, ValueError) as e:
        errors.append(str(e))
    return errors


if __name__ == "__main__":
    problems = check()
    for p in problems:
        print("error:", p)
    if problems:
        sys.exit(1)
    print("config OK")
