//! cordon-jail (under construction).
