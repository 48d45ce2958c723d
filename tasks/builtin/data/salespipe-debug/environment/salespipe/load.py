def load_rows(path):
    """The data rows as dicts: date (str), customer (str), amount (float)."""
    rows = []
    with open(path) as f:
        next(f)  # header
        for line in f:
            date, customer, amount = line.strip().split(",")
            rows.append({"date": date, "customer": customer, "amount": float(amount)})
    return rows
