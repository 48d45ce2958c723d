#!/bin/bash
# Classical RK4 with dt = 1e-3 (global error ~1e-11).
set -e
python3 - <<'PY'
import math


def f(theta, omega):
    return omega, -9.81 * math.sin(theta) - 0.3 * omega


dt, theta, omega = 1e-3, 2.0, 0.0
rows = [(0.0, theta, omega)]
for i in range(1, 10001):
    k1 = f(theta, omega)
    k2 = f(theta + dt / 2 * k1[0], omega + dt / 2 * k1[1])
    k3 = f(theta + dt / 2 * k2[0], omega + dt / 2 * k2[1])
    k4 = f(theta + dt * k3[0], omega + dt * k3[1])
    theta += dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
    omega += dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    if i % 500 == 0:
        rows.append((i * dt, theta, omega))
with open("trajectory.csv", "w") as out:
    out.write("t,theta,omega\n")
    for t, th, om in rows:
        out.write(f"{t:.1f},{th:.10f},{om:.10f}\n")
PY
