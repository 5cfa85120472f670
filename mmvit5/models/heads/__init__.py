from .dpt_depth_head import DPTDepthHead

__all__ = ['DPTDepthHead']
