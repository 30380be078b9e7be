"""Views: Plotly figures drawn from round records (the library never imports gradio)."""
