"""LibraSpec Explorer: a Gradio app racing static, LibraSpec and oracle speculative lengths.

Layout and wiring only; the decoding, the figures and the records live in `libraspec`, the
tabs in `ui/`. `python app.py` serves on 127.0.0.1:7860 (GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT override); LIBRASPEC_MODEL picks the model pair (default: the embedded
SmolLM2-135M pair; "tiny-llama" for tests). The pair loads once, on first use.

Importing this module builds nothing and changes no environment variable: `build_demo()`
makes the app, the module attribute `demo` builds it on first access (for hosts that
import `demo`), and `main()` sets `ui.hosting.environment_defaults()` before building. The
one import-time step is a Space's: on ZeroGPU `spaces` is imported before anything touches CUDA.
"""

from __future__ import annotations

import os

if os.environ.get("SPACES_ZERO_GPU"):
    import spaces  # noqa: F401  (ZeroGPU: imported before anything touches CUDA)

import gradio as gr  # noqa: E402

from ui import hosting  # noqa: E402
from ui.calibration_tab import CalibrationTab  # noqa: E402
from ui.race_tab import RaceTabs  # noqa: E402
from ui.session import Session  # noqa: E402
from ui.sweep_tab import SweepTab  # noqa: E402
from ui.teach_tab import TeachTab  # noqa: E402
from ui.whatif import WhatIf  # noqa: E402
from ui.whatif_tab import WhatIfTab  # noqa: E402

INTRO = (
    "# LibraSpec Explorer\n"
    "A drafter proposes n tokens per step with confidences q_i and the target verifies them in one pass. "
    "**Static** submits d = n, **LibraSpec** grows d while eps* = min_i eps_i says a draft pays off "
    "(Algorithm 1, trade-off alpha), **Oracle** takes the best d* in hindsight: the same text, different speed."
)


def build_demo(session: Session | None = None) -> gr.Blocks:
    """The app; `session` defaults to one that loads LIBRASPEC_MODEL (or the embedded pair)."""
    session = session or Session()
    hosting.start_up(session)
    whatif = WhatIf(session)  # one per app: the race tab's suggested alpha reads its recommendation
    tabs = RaceTabs(session, whatif)
    teach = TeachTab(session)
    with gr.Blocks(title="LibraSpec Explorer") as demo:
        gr.Markdown(INTRO)
        tabs.build_status()
        with gr.Tabs() as tab_set:
            tabs.build()
            teach.build()
            WhatIfTab(session, whatif).build()
            SweepTab(session).build()
            CalibrationTab(session, tabs.drafter).build()
        tabs.inspector.link_teach(teach, tab_set)
        tabs.attach_load(demo)
        teach.attach_load(demo)
    demo.queue(default_concurrency_limit=4)
    return demo


def __getattr__(name: str) -> gr.Blocks:
    """`demo`: the app, built on first access and kept (hosts that import `app.demo` find it)."""
    if name != "demo":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    demo = globals()["demo"] = build_demo()
    return demo


def main() -> None:
    for key, value in hosting.environment_defaults().items():
        os.environ.setdefault(key, value)
    build_demo().launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        footer_links=["api", "gradio"],
        theme=gr.themes.Soft(),
    )


if __name__ == "__main__":
    main()
