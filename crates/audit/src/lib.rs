//! cordon-audit (under construction).
