"""Terminal tables (rich) and pages (Plotly HTML, PNG through kaleido) of traces, comparisons and variants."""
