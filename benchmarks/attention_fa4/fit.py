# minimax (relative error) fit of 2^f with c0 = 1 fixed, on an interval, by LP
import numpy as np
from scipy.optimize import linprog
def fit(lo, hi, deg=3):
    f = np.linspace(lo, hi, 4001)
    t = 2.0 ** f
    # vars: c1..cdeg, e ; minimize e s.t. |1 + sum c_i f^i - t| / t <= e
    A = np.stack([f ** i / t for i in range(1, deg + 1)], 1)
    b = 1 - 1.0 / t   # (1 + A c)/1 ... rel err = (1 + sum c f^i)/t - 1 = 1/t + A c - 1
    ones = np.ones((len(f), 1))
    Aub = np.vstack([np.hstack([A, -ones]), np.hstack([-A, -ones])])
    bub = np.concatenate([1 - 1 / t, -(1 - 1 / t)])
    r = linprog(np.r_[np.zeros(deg), 1], A_ub=Aub, b_ub=bub, bounds=[(None, None)] * (deg + 1))
    c = np.r_[1.0, r.x[:deg]].astype(np.float32)
    ff = np.linspace(lo, hi, 200001).astype(np.float32)
    p = np.float32(c[3])
    for ci in c[2::-1]:
        p = p * ff + ci
    err = np.abs(p.astype(np.float64) / 2.0 ** ff.astype(np.float64) - 1).max()
    return c, err
for lo, hi in ((0, 1), (-0.5, 0.5)):
    c, e = fit(lo, hi)
    print(lo, hi, [float(x) for x in c], e)
fa4 = np.array([1.0, 0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625], np.float32)
ff = np.linspace(0, 1, 200001).astype(np.float32)
p = fa4[3]*ff*0
p = ((fa4[3] * ff + fa4[2]) * ff + fa4[1]) * ff + fa4[0]
print("fa4", np.abs(p / 2.0 ** ff.astype(np.float64) - 1).max())
