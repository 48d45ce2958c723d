def newton(f, df, x0, tol=1e-12, max_iter=50):
    raise NotImplementedError
