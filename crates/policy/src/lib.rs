//! cordon-policy (under construction).
