"""The Gradio app's tabs (layout and wiring) and their model session; only `app.py` and `ui/` import gradio."""
