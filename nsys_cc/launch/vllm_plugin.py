"""The vLLM plugin's old import path: `nsys_cc.vllm.plugin` is the plugin (what runs inside vLLM left `launch`).

Kept so that environments installed before the move (whose `vllm.general_plugins` entry point still names
`nsys_cc.launch.vllm_plugin:register`) and code that imports this path keep working: importing it gives the plugin
module itself, the same object (its state and patches are not duplicated). Listed in `nsys_cc._compat.SHIMS`
with the version it goes in.
"""

import sys

from ..vllm import plugin

sys.modules[__name__] = plugin
