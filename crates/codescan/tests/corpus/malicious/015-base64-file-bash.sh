base64 --decode payload.b64 | bash
