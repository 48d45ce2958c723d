from collections import Counter, defaultdict


def monthly_totals(rows):
    totals = defaultdict(float)
    for row in rows:
        totals[row["date"][:6]] += row["amount"]
    return {month: round(total, 2) for month, total in totals.items()}


def top_customer(rows):
    counts = Counter(row["customer"] for row in rows)
    return counts.most_common(1)[0][0] if counts else None


def summarize(rows):
    return {"rows": len(rows), "months": monthly_totals(rows), "top_customer": top_customer(rows)}
