//! cordon-egress (under construction).
